"""Launchers decide *where* a point runs. None of them imports a framework."""
