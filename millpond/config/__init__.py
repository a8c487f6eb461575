"""millpond.config"""
