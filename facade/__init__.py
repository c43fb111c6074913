"""kmq's client API: MSMQ semantics on Kafka topics."""
