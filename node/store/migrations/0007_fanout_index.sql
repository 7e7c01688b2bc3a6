-- Fan-out finds candidate subscriptions through subscription_terms (an index lookup per entry value);
-- subscriptions with no terms at all (match any entry, or any entry directed to the subscriber) come from
-- this partial index instead of a scan of every subscription.
CREATE INDEX subscriptions_termless ON subscriptions(id) WHERE n_tags + n_types + n_perfs + n_authors = 0;
