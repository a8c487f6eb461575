"""millpond.serdes"""
