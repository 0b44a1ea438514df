"""The bundled workloads: `--workload NAME` finds `NAME.py` here when `./models/NAME.py` does not
exist (runtime/workload.resolve). Each file is loaded by its path, never imported through this
package; the package exists so that an installed omnitune ships them."""
