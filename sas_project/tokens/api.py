"""The API tokens API (/api/v1/tokens/): every signed-in user makes, lists and revokes its own
tokens; administrators may list another user's (`?user=<username>`) and revoke any. Another
user's token is a 404, as if it did not exist. A key is in one answer only, the one that made it
(`POST /api/v1/tokens/`, the console's API tokens page, or `manage.py drf_create_token`): only
its digest is stored."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from sas_project.api import ApiView, StrictSerializer, errors, query_params, validated
from sas_project.named_views import Doc, NamedResourcesView, collection_schema, operation
from sas_project.tokens.models import ApiToken, TokenStatus
from sas_project.tokens.services import token_create, token_for, token_revoke, tokens_visible


class TokenSerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="user.get_username", read_only=True)
    revoked_by = serializers.SerializerMethodField()
    status = serializers.ChoiceField(choices=TokenStatus.choices, read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "user",
            "status",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "revoked_by",
        ]
        read_only_fields = fields

    def get_revoked_by(self, token: ApiToken) -> str | None:
        return token.revoked_by.get_username() if token.revoked_by is not None else None


class TokenListQuerySerializer(StrictSerializer):
    user = serializers.CharField(required=False, max_length=150, help_text="Another user's (administrators).")
    page = serializers.IntegerField(required=False, min_value=1)
    page_size = serializers.IntegerField(required=False, min_value=1)


class RevokeSerializer(StrictSerializer):
    pass


class TokenCreateSerializer(StrictSerializer):
    name = serializers.CharField(
        max_length=100, help_text="What the token is for (1-100 printable characters)."
    )
    lifetime_days = serializers.FloatField(
        required=False,
        help_text="Days until it expires: more than 0 and at most SAS_TOKEN_LIFETIME_DAYS (the default).",
    )


class TokenCreatedSerializer(TokenSerializer):
    key = serializers.CharField(
        read_only=True, help_text="The key, in this answer only: send it as `Authorization: Token <key>`."
    )

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "key"]
        read_only_fields = fields


@collection_schema(
    "tokens",
    # Any signed-in user may: no role to lack (403); a malformed ?user= is a 400.
    listing=Doc(
        "Your API tokens (an administrator: anyone's, with ?user=)",
        parameters=[OpenApiParameter("user", str, description="A username (administrators only).")],
        errors=(400, 401),
    ),
    create=Doc(
        "Make an API token for yourself (the key is in this answer only)",
        "The new token acts as you, with your roles. Its key is shown in this answer and "
        "never again (only its digest is stored); lose it and make another. The creation is recorded "
        "with your user in the admin log.",
        errors=(400, 401, 413),
    ),
    request=TokenCreateSerializer,
    created=TokenCreatedSerializer,
)
class TokensView(NamedResourcesView):
    permission_classes = [IsAuthenticated]
    serializer = TokenSerializer
    item_url = "api-token"

    def listing(self, request: Request) -> Any:
        query = query_params(TokenListQuerySerializer, request)
        return tokens_visible(request.user, owner=query.get("user"))

    def post(self, request: Request) -> Response:
        data = validated(TokenCreateSerializer, request.data)
        token, key = token_create(
            user=request.user,
            name=data["name"],
            lifetime_days=data.get("lifetime_days"),
            actor=request.user,
            minted_by=request.auth if isinstance(request.auth, ApiToken) else None,
        )
        body = TokenCreatedSerializer(token_for(request.user, token_id=token.pk)).data
        return self.created({**body, "key": key}, token_id=token.pk)


class TokenView(ApiView):
    permission_classes = [IsAuthenticated]

    @operation(
        "tokens",
        "tokens_read",
        "One of your API tokens",
        responses={200: TokenSerializer, **errors(401, 404)},
    )
    def get(self, request: Request, token_id: int) -> Response:
        return Response(TokenSerializer(token_for(request.user, token_id=token_id)).data)


class TokenRevokeView(ApiView):
    permission_classes = [IsAuthenticated]

    @operation(
        "tokens",
        "tokens_revoke",
        "Revoke an API token (yours; an administrator: any)",
        description="Idempotent: revoking a revoked token answers it as it is.",
        request=RevokeSerializer,
        responses={200: TokenSerializer, **errors(400, 401, 404)},
    )
    def post(self, request: Request, token_id: int) -> Response:
        validated(RevokeSerializer, request.data)
        token = token_revoke(token_id=token_id, actor=request.user)
        return Response(TokenSerializer(token_for(request.user, token_id=token.pk)).data)
