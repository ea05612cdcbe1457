"""Who may see a page: Airflow's own auth manager decides, from the same JWT the UI and REST API use.

No user database or secret of our own: the token comes from the UI's cookie or an `Authorization:
Bearer` header, is resolved by `get_user` (Airflow's dependency), and the DAG whose run a page serves
is checked with the auth manager's `is_authorized_dag`, with the DAG's team as Airflow's own DAG routes
pass it. An anonymous (or forged-token) browser navigation is redirected to the login page; anything
else gets 401. A request that changes something must come from a page of this site (`require_same_origin`).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from fastapi import HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

_bearer = HTTPBearer(auto_error=False)
CROSS_SITE = "cross-site request refused: it must come from a page of this site (Origin or Referer)"


class LoginRedirect(Exception):
    """Raised for an anonymous browser navigation; the app turns it into a redirect to the login page."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "") and "authorization" not in request.headers


async def current_user(request: Request):
    """The authenticated Airflow user, or 401 / a redirect to the login page."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.core_api.security import get_user

    credentials: HTTPAuthorizationCredentials | None = await _bearer(request)
    try:
        return await get_user(request, None, credentials)
    except HTTPException as error:
        if error.status_code not in (401, 403):
            raise
        if _wants_html(request):
            raise LoginRedirect(get_auth_manager().get_url_login(next_url=str(request.url))) from None
        raise HTTPException(status_code=401, detail="Not authenticated") from None


def _dag_details(dag_id: str | None):
    """The DAG as the auth manager judges it: its id and its team (the team of its bundle, None outside
    multi-team mode), as Airflow's own DAG routes pass them; without the team a user of one team passed
    every team's DAG here. None (DAGs in general) for a run made outside Airflow."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
    from airflow.models.dag import DagModel

    return DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id)) if dag_id else None


def may_read_dag(user, dag_id: str | None) -> bool:
    """The auth manager's own check: GET on that DAG (on DAGs in general for a run made outside Airflow)."""
    from airflow.api_fastapi.app import get_auth_manager

    return bool(get_auth_manager().is_authorized_dag(method="GET", details=_dag_details(dag_id), user=user))


def require_dag(user, dag_id: str | None) -> None:
    if not may_read_dag(user, dag_id):
        raise HTTPException(status_code=403, detail=f"no read access to DAG {dag_id or '(any)'}")


def may_edit_dag(user, dag_id: str | None) -> bool:
    """The auth manager's own check for changing a DAG (PUT)."""
    from airflow.api_fastapi.app import get_auth_manager

    return bool(get_auth_manager().is_authorized_dag(method="PUT", details=_dag_details(dag_id), user=user))


def may_edit_all(user, dag_ids: Iterable[str]) -> bool:
    """Edit access to each of `dag_ids` ('' is a run made outside Airflow: DAGs in general). An annotation
    re-baselines a series for every DAG that runs it, so it needs all of them, not only the one DAG whose
    run the change happened in. The caller refuses an empty list (nothing to annotate) on its own."""
    return all(may_edit_dag(user, dag_id or None) for dag_id in sorted(set(dag_ids)))


def _host(url: str) -> str | None:
    """`host[:port]` of an http(s) Origin or Referer, lower case; None for `null` or anything else."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return parts.netloc.lower() if parts.scheme in ("http", "https") and parts.netloc else None


def _own_hosts(request: Request) -> set[str]:
    """This site's `host[:port]`: the request's Host, and the public base URL's where Airflow has one."""
    from airflow.configuration import conf

    hosts = {request.headers.get("host", "").lower()}
    base = conf.get("api", "base_url", fallback="") or ""
    if base:
        hosts.add((_host(base) or "").lower())
    return hosts - {""}


def require_same_origin(request: Request) -> None:
    """403 unless the request comes from a page of this site. A browser sends Origin (or at least Referer)
    with every form POST, and a cross-site page's form carries the session cookie where SameSite allows
    it: that page must not annotate in the reader's name. A request with neither header and an explicit
    `Authorization: Bearer` token is a REST client's: no browser adds that header to a cross-site request
    by itself, and the token (not the cookie) is then the caller's identity (Airflow's `get_user`)."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if source is None:
        if request.headers.get("authorization", "").lower().startswith("bearer "):
            return
        raise HTTPException(status_code=403, detail=CROSS_SITE)
    if _host(source) not in _own_hosts(request):
        raise HTTPException(status_code=403, detail=CROSS_SITE)
