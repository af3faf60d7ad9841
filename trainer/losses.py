"""Pretraining loss and metrics (docs/reference-facts.md, "Pretraining loss"), as sums that add up across
replicas; the `Objective` interface the training steps (steps.py) use for pretraining and fine-tuning alike.

The reference loss is the masked-LM cross-entropy weighted by
`masked_lm_weights` and divided by their sum (+1e-5), plus the next-sentence
cross-entropy averaged over the sequences. Each replica returns the sums
below; the training step divides by the totals of the whole global batch
(all replicas, all accumulated micro-batches), so any split of a global
batch gives the same loss and gradient as one device holding all of it.

Packed rows (`bertprep pack`) count per sequence: each real prediction
weighs 1 (the record holds its sequence's number there) and each sequence
present has one next-sentence term (`next_sentence_weights`), so a packed
batch has the loss and gradient of the same sequences unpacked.
"""

from keras import ops

# Keys of the per-step sums, in the order the training step returns them.
SUM_KEYS = ("mlm_loss_sum", "mlm_weight_sum", "mlm_correct", "nsp_loss_sum", "nsp_correct", "sequences", "tokens")


def is_packed(batch):
    return "next_sentence_weights" in batch


def prediction_weights(batch):
    """The weight of each masked-LM slot: masked_lm_weights, or 1.0 for each real slot of a packed row."""
    weights = ops.cast(batch["masked_lm_weights"], "float32")
    return ops.cast(weights > 0, "float32") if is_packed(batch) else weights


def sequence_weights(batch):
    """1.0 for each real sequence, flat: every row unpacked, next_sentence_weights packed."""
    if is_packed(batch):
        return ops.reshape(ops.cast(batch["next_sentence_weights"], "float32"), (-1,))
    return ops.ones((ops.size(batch["next_sentence_labels"]),), "float32")


def weight_totals(batch):
    """(prediction weight, sequences) of a batch: what the loss of a global batch is divided by."""
    return ops.sum(prediction_weights(batch)), ops.sum(sequence_weights(batch))


def cross_entropy_and_hits(logits, labels):
    """Over the last axis of `logits`, for integer `labels` of the leading shape: the cross-entropy
    -log softmax(logits)[label], and 1.0 where the label's logit is a largest one, else 0.0 (top-1
    accuracy as tf.math.in_top_k counts it: a tie for the largest logit counts as a hit).

    The cross-entropy is logsumexp(logits) minus the label's logit, picked by comparing an iota with
    the label. The usual log_softmax + take_along_axis has the same value, but its gradient scatters
    into a zeroed buffer the size of the logits, and argmax is a two-operand reduction; on a CPU,
    over a 30,522-word vocabulary, those passes cost 5% of a mini model's training step (measured
    with scripts/profile_train_step.py, docs/trainer.md). Here the backward pass is softmax minus
    one-hot in one elementwise pass, and the hit reuses the maximum that logsumexp needs anyway."""
    labels = ops.cast(labels, "int32")
    is_label = ops.arange(ops.shape(logits)[-1], dtype="int32") == labels[..., None]
    picked = ops.sum(ops.where(is_label, logits, ops.zeros_like(logits)), axis=-1)
    nll = ops.logsumexp(logits, axis=-1) - picked
    return nll, ops.cast(picked >= ops.max(logits, axis=-1), "float32")


def loss_sums(mlm_logits, nsp_logits, batch):
    """Sums over one (micro-)batch: weighted MLM cross-entropy and correct predictions, the
    weight total, NSP cross-entropy and correct predictions, the sequences and real tokens."""
    ids = ops.cast(batch["masked_lm_ids"], "int32")
    weights = prediction_weights(batch)
    mlm_nll, mlm_hits = cross_entropy_and_hits(mlm_logits, ids)
    labels = ops.reshape(ops.cast(batch["next_sentence_labels"], "int32"), (-1,))
    nsp_logits = ops.reshape(nsp_logits, (-1, 2))  # [batch, 2], or [batch * k, 2] for packed rows
    present = sequence_weights(batch)
    nsp_nll, nsp_hits = cross_entropy_and_hits(nsp_logits, labels)
    return {
        "mlm_loss_sum": ops.sum(mlm_nll * weights),
        "mlm_weight_sum": ops.sum(weights),
        "mlm_correct": ops.sum(mlm_hits * weights),
        "nsp_loss_sum": ops.sum(nsp_nll * present),
        "nsp_correct": ops.sum(nsp_hits * present),
        "sequences": ops.sum(present),
        "tokens": ops.sum(ops.cast(ops.not_equal(batch["input_mask"], 0), "float32")),
    }


def objective(sums, total_weight, total_sequences):
    """This (micro-)batch's share of the global-batch loss; the shares add up to the loss."""
    return sums["mlm_loss_sum"] / (total_weight + 1e-5) + sums["nsp_loss_sum"] / total_sequences


def metrics(totals):
    """Loss and accuracies from sums over a global batch (or several), as Python floats."""
    mlm_loss = totals["mlm_loss_sum"] / (totals["mlm_weight_sum"] + 1e-5)
    nsp_loss = totals["nsp_loss_sum"] / max(totals["sequences"], 1.0)
    return {
        "loss": mlm_loss + nsp_loss,
        "mlm_loss": mlm_loss,
        "nsp_loss": nsp_loss,
        "mlm_accuracy": totals["mlm_correct"] / max(totals["mlm_weight_sum"], 1e-5),
        "nsp_accuracy": totals["nsp_correct"] / max(totals["sequences"], 1.0),
    }


class Objective:
    """What a training step needs to know about a model's loss, whatever the task.

    `input_names`: the batch features the model takes; `sum_keys`: the sums `sums` returns for a
    (micro-)batch; `totals(element)`: the denominators of the loss over a whole step element (the
    steps add them across replicas); `share(sums, totals)`: the (micro-)batch's share of the loss,
    the shares of a global batch adding up to its loss, so any split gives the same gradient.
    """

    input_names: tuple[str, ...] = ()
    sum_keys: tuple[str, ...] = ()

    def inputs(self, batch):
        return {name: batch[name] for name in self.input_names}

    def sums(self, outputs, batch):
        raise NotImplementedError

    def totals(self, element):
        raise NotImplementedError

    def share(self, sums, totals):
        raise NotImplementedError


class PretrainingObjective(Objective):
    # Packed rows add the last two (each token's place in its sequence, each sequence's [CLS]).
    input_names = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "positions",
                   "next_sentence_positions")
    sum_keys = SUM_KEYS
    metrics = staticmethod(metrics)

    def inputs(self, batch):
        return {name: batch[name] for name in self.input_names if name in batch}

    def sums(self, outputs, batch):
        mlm_logits, nsp_logits = outputs
        return loss_sums(mlm_logits, nsp_logits, batch)

    def totals(self, element):
        weight, sequences = weight_totals(element)
        return {"weight": weight, "sequences": sequences}

    def share(self, sums, totals):
        return objective(sums, totals["weight"], totals["sequences"])


PRETRAINING_OBJECTIVE = PretrainingObjective()
