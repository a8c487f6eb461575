"""Changelogs: the logged store layer, checkpoints, local store directories, restore and
recovery (planned first, then acted), changelog generations."""
