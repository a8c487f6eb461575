"""The workloads of `make bench`, one module a family; each is a function of a Harness."""
