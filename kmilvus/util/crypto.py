"""Passwords as Milvus keeps them (its crypto.PasswordEncrypt / PasswordVerify): salted bcrypt.
The Proxy hashes a password before it reaches RootCoord and checks one against the stored hash;
RootCoord hashes the root user's."""

from __future__ import annotations

import bcrypt

BCRYPT_COST = 10  # Milvus' bcrypt.DefaultCost


def hash_password(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_COST)).decode()


def verify_password(password: str, hashed: str) -> bool:
    return bcrypt.checkpw(password.encode(), hashed.encode())
