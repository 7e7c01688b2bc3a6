"""The inbox: subscriptions, notifications and their fan-out."""
