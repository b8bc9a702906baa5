"""Task families. Each provides image recipes, task setup, tools, an oracle solution and a grader.

The env core finds them by name through ``sandgym.envs.core.FAMILIES``.
"""
