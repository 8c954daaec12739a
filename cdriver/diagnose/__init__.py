"""`cdriver diagnose`: walk a ComputeDomain's chain of owner boundaries and name the first broken one.

Data flows one way: `collect` reads the API (read-only) into a snapshot of plain dicts,
`chain` runs the pure link checks over it, `render` prints text or JSON, `cli` wires them.
"""
