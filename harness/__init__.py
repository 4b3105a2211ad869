"""What runs a deployment's processes, for dcnet, the benchmarks, the tests and the controller (which stops
and starts switch processes on ``fail``/``recover``): pid files that name one process, group stops, children
that die with their parent, the switches' scheduling priority (``processes``); redis-server (``redis``);
py-spy profiles (``profile``); namespaces of veth pairs (``netns``).  A library: it imports no application.
"""
