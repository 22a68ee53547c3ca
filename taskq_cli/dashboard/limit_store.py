"""Where the dashboards read the rate limits the workers keep in Redis (TASKQ_REDIS_URL).

``taskq top`` and ``taskq ui`` both hand it to ``BackendSource``; without it those limits'
use shows as unknown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from taskq_core.ratelimit.redis import RedisLimiterStore
    from taskq_core.settings import TaskqSettings


def redis_limit_store(settings: TaskqSettings) -> RedisLimiterStore | None:
    """The Redis the workers keep rate limits in (TASKQ_REDIS_URL), to show their use;
    None when none is configured. The caller closes it."""
    if not settings.redis_url:
        return None
    # Imported here: the Redis client loads only when a Redis is configured.
    from taskq_core.ratelimit.redis import RedisLimiterStore, default_prefix

    return RedisLimiterStore.from_url(
        settings.redis_url, prefix=default_prefix(settings.schema_name)
    )
