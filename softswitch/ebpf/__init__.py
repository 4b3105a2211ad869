"""The PSA build of p4src/ run by the kernel (issue 19): p4c-ebpf compiles p4src/psa/distcache.p4 to C,
clang and llc build it into a BPF object (:mod:`.build`), and libbpf loads its programs and maps, each
switch under its own pin root (:mod:`.libbpf`).  The same controls as BMv2's and softswitch's, compiled
by a real compiler: what the kernel target serves over P4Runtime is the program's own BPF maps."""
