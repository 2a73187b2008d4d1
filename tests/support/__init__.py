"""Helpers shared by test tiers (certificates, ...)."""
