"""Reliability tests (issue 15): bad input through the real asset, crashes and faults, readers during runs, inbox."""
