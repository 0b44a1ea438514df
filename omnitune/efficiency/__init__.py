"""The two efficiencies omnitune multiplies: hardware (perfmodel: seconds per iteration; the
simulator and fleets for what the profile never ran; balance: per-device batches) and statistical
(statmodel: iterations to target, staleness, momentum). Pure: no torch."""
