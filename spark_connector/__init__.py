"""Spark connector for kmq queues (Structured Streaming over Kafka).

Not implemented yet: it arrives with the Spark connector issue. Importing this package gives
nothing but this notice.
"""
