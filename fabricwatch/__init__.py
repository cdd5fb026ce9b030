"""The fabricwatch CLI, settings, local stack launcher, demo and report."""
