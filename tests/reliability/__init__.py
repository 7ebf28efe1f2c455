"""The reliability campaign of issue 8, sized for CI; benchmarks/reliability.py runs it
at full size. The modules without ``test_`` hold the cases and checks both share."""
