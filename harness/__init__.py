"""What runs a deployment's processes, for dcnet, the benchmarks, the tests and the controller (which stops
and starts switch processes on ``fail``/``recover``): pid files that name one process, group stops, the
switches' scheduling priority.  A library: it imports no application.
"""
