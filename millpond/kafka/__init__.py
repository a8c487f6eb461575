"""Everything that talks to Kafka and is not changelog specific: clients, the tracked
(transactional) producer, topic admin and bulk partition reads."""
