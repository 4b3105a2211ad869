module distcache-p4/tools/dcload

go 1.19
