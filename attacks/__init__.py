"""Canaries and distinguishing attacks: each attack turns observations into one score per trial."""

from attacks.base import Attack
from attacks.registry import ATTACKS, default_attack, get_attack

__all__ = ["ATTACKS", "Attack", "default_attack", "get_attack"]
