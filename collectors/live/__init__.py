"""Live collectors for an opensm-managed InfiniBand fabric: the ibdiags poller and the opensm log follower.

Unlike the parsers one level up (pure text -> events), these run the real tools on a schedule
and publish through ``collectors.publish.Publisher``.
"""
