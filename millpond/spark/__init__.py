"""millpond.spark"""
