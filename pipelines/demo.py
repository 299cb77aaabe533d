"""Demo: a budgeted release from a synthetic browsing log, using only the mechanisms core.

It plans a budget split over named queries *before* touching the data, bounds each person's
contribution, and releases every statistic through a keyed noise stream, then prints the noisy
results and what was spent. The Beam release job (config file, Parquet/Avro in and out) builds on
exactly these pieces.

Run: ``make demo`` (or ``python -m pipelines.demo [--persons N] [--seed S]``).
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from fractions import Fraction

import numpy as np

from transforms.mechanisms.accounting import (
    ApproxDP,
    PureDP,
    compose,
    pure_to_approx,
    split_budget,
    zcdp_budget_for,
    zcdp_to_approx,
)
from transforms.mechanisms.additive import GaussianMechanism, LaplaceMechanism
from transforms.mechanisms.exponential import ExponentialMechanism
from transforms.mechanisms.rng import ReleaseKey

DOMAINS = ["news.example", "shop.example", "mail.example", "video.example", "maps.example"]
MAX_ROWS_PER_PERSON = 20  # C for the total: each person contributes ≤ 20 visits
MAX_DOMAINS_PER_PERSON = 3  # L for the per-domain counts
MAX_ROWS_PER_DOMAIN = 10  # C per (person, domain)


def synthetic_log(persons: int, seed: int) -> list[tuple[int, str]]:
    """(person, domain) visit rows. Synthetic *data*, so a seeded NumPy generator is fine here."""
    gen = np.random.default_rng(seed)  # not noise: generates the demo's input data
    popularity = np.array([0.35, 0.25, 0.2, 0.15, 0.05])
    rows = []
    for person in range(persons):
        visits = int(gen.geometric(0.08))
        for d in gen.choice(len(DOMAINS), size=visits, p=popularity):
            rows.append((person, DOMAINS[d]))
    return rows


def bound_rows(rows: list[tuple[int, str]]) -> tuple[int, dict[str, int], dict[str, int]]:
    """Contribution bounding (first rows of each person; depends only on that person's rows)."""
    per_person: dict[int, list[str]] = defaultdict(list)
    for person, domain in rows:
        per_person[person].append(domain)
    total = sum(min(len(v), MAX_ROWS_PER_PERSON) for v in per_person.values())
    visits: Counter[str] = Counter()
    persons: Counter[str] = Counter()
    for domains in per_person.values():
        # The person's most visited domains (ties by name): a function of their own rows only.
        by_use = Counter(domains).most_common()
        kept = [d for d, _ in sorted(by_use, key=lambda dc: (-dc[1], dc[0]))]
        kept = kept[:MAX_DOMAINS_PER_PERSON]
        for d in kept:
            visits[d] += min(domains.count(d), MAX_ROWS_PER_DOMAIN)
            persons[d] += 1
    return total, dict(visits), dict(persons)


def _epsilon(share: object) -> float:
    assert isinstance(share, PureDP)
    return float(share.epsilon)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=7, help="seed of the synthetic data only")
    args = parser.parse_args()

    # 1. Plan: split the total before reading any data; an overspend fails here, with numbers.
    total = ApproxDP(epsilon=Fraction(2), delta=Fraction(1, 10**6))
    shares = split_budget(
        total,
        {
            "total_visits": PureDP(Fraction(1, 2)),
            "visits_per_domain": None,  # the rest, as (ε, δ) for a Gaussian mechanism
            "top_domain": PureDP(Fraction(1, 2)),
        },
    )
    eps_total, eps_top = _epsilon(shares["total_visits"]), _epsilon(shares["top_domain"])
    domain_share = shares["visits_per_domain"]
    assert isinstance(domain_share, ApproxDP)
    rho = zcdp_budget_for(domain_share)
    total_mech = LaplaceMechanism(l1_sensitivity=MAX_ROWS_PER_PERSON, epsilon=eps_total)
    domain_mech = GaussianMechanism(
        l2_sensitivity=MAX_DOMAINS_PER_PERSON**0.5 * MAX_ROWS_PER_DOMAIN,
        rho=float(rho.rho),
        dimension=len(DOMAINS),
    )
    # A person adds at most 1 to every domain's person count, all in the same direction.
    top_mech = ExponentialMechanism(epsilon=eps_top, sensitivity=1, monotone=True)

    # 2. Read and bound the data; 3. release through keyed streams (one label per value).
    total_rows, visits, persons = bound_rows(synthetic_log(args.persons, args.seed))
    key = ReleaseKey.generate()
    noisy_total = total_mech.release(total_rows, key.rng("total_visits", "noise"))
    noisy_visits = domain_mech.release_vector(
        [visits.get(d, 0) for d in DOMAINS], key.rng("visits_per_domain", "noise")
    )
    top = top_mech.select([persons.get(d, 0) for d in DOMAINS], key.rng("top_domain", "choice"))

    print("userdp demo — every number below is differentially private\n")
    print(f"total visits (≤{MAX_ROWS_PER_PERSON}/person, Laplace σ={total_mech.std:.1f}): ")
    print(f"  {noisy_total:,.0f}")
    print(f"visits per domain (Gaussian σ={domain_mech.std:.1f}):")
    for d, v in zip(DOMAINS, noisy_visits, strict=True):
        print(f"  {d:15} {v:10,.0f}")
    print(f"domain with the most persons (exponential mechanism): {DOMAINS[top]}\n")
    spent = compose(
        pure_to_approx(PureDP(eps_total)),
        zcdp_to_approx(rho, domain_share.delta),
        pure_to_approx(PureDP(eps_top)),
    )
    print(f"budget: total {total}; spent {spent}")
    for name, share in shares.items():
        print(f"  {name:18} {share}")


if __name__ == "__main__":
    main()
