"""millpond.tasks"""
