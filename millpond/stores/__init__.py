"""millpond.stores"""
