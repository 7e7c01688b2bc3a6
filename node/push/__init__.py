"""NLIP push (issue 26): agents' push endpoints, and the dispatcher that sends them hints of new notifications.

`endpoints` holds the registered endpoints and their validation, `sender` one endpoint's queue (coalescing,
retries with capped backoff, circuit breaker), `dispatcher` the after-commit scan that feeds the senders, and
`routes` the REST routes, the app's set-up and its background task. See docs/nlip.md.
"""
