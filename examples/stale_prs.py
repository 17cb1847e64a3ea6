import asyncio
from datetime import UTC, datetime, timedelta

prs = await tools.github__list_prs(repo="acme/api", state="open")
cutoff = datetime.now(UTC) - timedelta(days=14)
stale = [pr for pr in prs if datetime.fromisoformat(pr["updated_at"]) < cutoff]
print(f"{len(stale)} stale PRs")
reviews = await asyncio.gather(*(tools.github__get_reviews(number=pr["number"]) for pr in stale))
return [{"number": pr["number"], "reviews": len(r)} for pr, r in zip(stale, reviews)]
