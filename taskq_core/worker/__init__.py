"""The worker runtime: producer, consumers, heartbeat, leader loops, shutdown, until-idle."""
