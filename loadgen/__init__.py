"""Load generation for experiments and benchmarks: the YCSB-style workload engine behind ``distcache bench``,
the history recorder of the fault matrix, the staleness oracle that judges reads, and a UDP echo server that
measures a generator alone.  Built on client_lib, beside the experiment drivers (mininet/dcnet, bench/)."""
