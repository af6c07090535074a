"""Identity (product core): who may sign in and how that is recorded.

- ``signins``: the audit rows of sign-ins, failures, lockouts and token refreshes;
- ``lockout``: the generic lockout answer and lifting a lockout (django-axes keeps the counters);
- ``revocation``: signing out, deactivating or removing a user's last role revokes their tokens and
  closes their websockets;
- ``users``: deactivating, reactivating, setting roles and deleting users (audited services that
  revoke what the change entails; the user admin calls them);
- ``provider_users``: users from the identity provider (created and given roles, audited);
- ``tokens``: the API's JWT authentication that honours a revocation;
- ``receivers``: the sign-in signals of Django and django-axes (connected at start); no model signals.
"""
