"""The transaction coordinator: Kafka's transactions with their decisions in Delta (DESIGN D9)."""
