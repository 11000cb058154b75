"""Helpers shared by the tests: brokers, configurations, the fake IBM MQ queue manager, a TCP
proxy, running bridges. Test modules import helpers only from here, never from each other."""
