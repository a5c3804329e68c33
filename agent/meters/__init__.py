"""Meters: one per device, all behind `base.Meter`, chosen in grade order by `select`."""
