"""The multi-node test's workflow: three functions whose closures differ (test_ship_nodes.py)."""
