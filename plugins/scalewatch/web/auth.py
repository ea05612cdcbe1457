"""Who may see a page: Airflow's own auth manager decides, from the same JWT the UI and REST API use.

No user database or secret of our own: the token comes from the UI's cookie or an `Authorization:
Bearer` header, is resolved by `get_user` (Airflow's dependency), and the DAG whose run a page serves
is checked with the auth manager's `is_authorized_dag`. An anonymous (or forged-token) browser
navigation is redirected to the login page; anything else gets 401.
"""

from __future__ import annotations

from fastapi import HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

_bearer = HTTPBearer(auto_error=False)


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


def may_read_dag(user, dag_id: str | None) -> bool:
    """The auth manager's own check: GET on that DAG (on DAGs in general for a run made outside Airflow)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    details = DagDetails(id=dag_id) if dag_id else None
    return bool(get_auth_manager().is_authorized_dag(method="GET", details=details, user=user))


def require_dag(user, dag_id: str | None) -> None:
    if not may_read_dag(user, dag_id):
        raise HTTPException(status_code=403, detail=f"no read access to DAG {dag_id or '(any)'}")


def may_edit_dag(user, dag_id: str | None) -> bool:
    """The auth manager's own check for changing a DAG (PUT): who may mark its change points."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    details = DagDetails(id=dag_id) if dag_id else None
    return bool(get_auth_manager().is_authorized_dag(method="PUT", details=details, user=user))
