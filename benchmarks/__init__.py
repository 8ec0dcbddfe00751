"""The maintained benchmark suite: each script feeds a current table of benchmarks/RESULTS.md.

`run_all.py` runs them in turn (``ORDER``) and names those run apart, with why (``SEPARATE``);
``HELPERS`` are modules the scripts share, not scripts. Scripts import each other as
``benchmarks.<name>``; each one that does puts the checkout's root on ``sys.path`` first, so
``python benchmarks/<name>.py`` and ``python -m benchmarks.<name>`` both run it. The dated record
of how the tables were reached, with the one-off scripts of each investigation, is docs/notebook/.
"""
