"""bench/ship.py's workflow: test_ship_nodes.py's three functions, each also naming the node
that ran it (its LFM_NODE_CACHE), so the bench can time each node's first result."""
