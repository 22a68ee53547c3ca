"""Example actors used by the demo, the example workgroup and the end-to-end tests."""
