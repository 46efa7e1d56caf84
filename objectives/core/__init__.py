"""The pure core of Factory (objectives): no Django, no clock, no I/O."""
