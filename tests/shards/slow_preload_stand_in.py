"""A fork server preload that takes long (not a test): what importing torch is to the
workers' fork server, for tests/shards/test_fork_server_loss.py."""
import time

time.sleep(60)
