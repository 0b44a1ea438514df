import sys

from omnitune.cli.app import main

sys.exit(main())
