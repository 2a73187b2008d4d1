"""Coordinators on the driver (DESIGN D8): the group coordinator (`group/`) and its Delta-backed
offsets store. Each is a sans-IO core with a thin asyncio server edge."""
