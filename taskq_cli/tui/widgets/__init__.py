"""The dashboard's panes and screens, one per module."""
