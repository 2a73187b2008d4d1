"""Kafka's wire protocol: framing as a sans-IO state machine, message (de)serialization via
`kio`, and the table of API versions sparklog serves."""
