"""Identity (product core): who may sign in and how that is recorded.

- ``signins``: the audit rows of sign-ins, failures, lockouts and token refreshes;
- ``lockout``: the generic lockout answer and lifting a lockout (django-axes keeps the counters);
- ``revocation``: signing out, deactivating or removing a user's last role revokes their tokens and
  closes their websockets;
- ``tokens``: the API's JWT authentication that honours a revocation;
- ``receivers``: the Django, axes and model signals that drive the above (connected at start).
"""
