"""The ground floor: plain records every layer above shares.

Histories, candidates, steps, trajectories, search trees and training
examples are dataclasses that import nothing of ours but each other, and no
torch, transformers or gymnasium (``tests/test_layering.py`` keeps it so).
"""
