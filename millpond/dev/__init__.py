"""millpond.dev"""
