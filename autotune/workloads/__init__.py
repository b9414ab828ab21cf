"""What is trained: built-in presets, hub and local models, their data and task."""
