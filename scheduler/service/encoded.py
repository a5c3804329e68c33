"""Each claim's checkpoint encoding, kept while the claim is unchanged.

A checkpoint holds every claim (kernel/checkpoint.py), and most claims are
the same objects from one checkpoint to the next: a state changes only the
claims its events touch, and shares the rest. So each claim's det-CBOR is
kept beside the Claim it was made from, made again only when the claim in
the state is another object, and the claims array is spliced together from
those bytes (dcbor.Raw): a checkpoint then costs a lookup per claim on the
event loop, not an encoding. The bytes are exactly checkpoint.claims_body's
encoding (tests/service/test_encoded.py).
"""

from __future__ import annotations

from scheduler.kernel import Claim, ClusterState
from scheduler.kernel.codec import encode_compact
from scheduler.ledger import dcbor


class EncodedClaims:
    def __init__(self) -> None:
        self._by_id: dict[str, tuple[Claim, bytes]] = {}

    def __call__(self, state: ClusterState) -> dcbor.Raw:
        """The state's claims in id order, as checkpoint.claims_body encodes them;
        what it keeps from then on is the encodings of these claims only."""
        claims, kept, known = state.claims.to_dict(), {}, self._by_id
        for claim_id in sorted(claims):
            claim = claims[claim_id]
            entry = known.get(claim_id)
            if entry is None or entry[0] is not claim:
                entry = (claim, dcbor.encode(encode_compact(claim)))
            kept[claim_id] = entry
        self._by_id = kept
        return dcbor.array([data for _, data in kept.values()])
