"""The Kafka adapter: client settings, input alignment, the consumer loop, the dead-letter topic."""
