"""millpond.changelog"""
