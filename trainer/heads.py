"""Task models for fine-tuning, and their losses as `losses.Objective`s for the training steps.

Each model is the shared `BertEncoder` (named "bert", so a pretraining
checkpoint's encoder variables load by path) plus one head, as in
google-research/bert:

- SQuAD (run_squad.py): a dense layer of 2 units on every token's final
  hidden state gives start and end logits; loss = the mean over sequences of
  (start cross-entropy + end cross-entropy) / 2. The pooler is never used, so
  this model has none (the reference's optimizer skips its gradient-less
  variables: no weight decay for them either).
- GLUE classification (run_classifier.py): dropout then a dense layer of one
  unit per label on the pooled [CLS]; loss = mean cross-entropy.
- STS-B (regression; the reference has no processor for it): one unit on the
  pooled [CLS]; loss = mean squared error against the float label.

GLUE losses and accuracies are weighted by `is_real_example` (0 only for
padding examples, which the reference adds for TPUs). Heads compute in the
dtype policy and return float32.
"""

import keras
from keras import ops

from trainer.losses import Objective, cross_entropy_and_hits
from trainer.model import BertEncoder, _init

FEATURE_INPUTS = ("input_ids", "input_mask", "segment_ids")


class BertForSpans(BertEncoder):
    """inputs: input_ids, input_mask, segment_ids [batch, seq]; returns start_logits, end_logits [batch, seq]."""

    def __init__(self, config, **kwargs):
        super().__init__(config, with_pooler=False, **kwargs)
        self.span = keras.layers.Dense(2, kernel_initializer=_init(config), name="squad")

    @property
    def head(self):
        return self.span

    def call(self, inputs, training=False):
        logits = ops.cast(self.span(self.encode(inputs, training=training)), "float32")
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}


class BertForSequences(BertEncoder):
    """inputs: input_ids, input_mask, segment_ids [batch, seq]; returns logits [batch, outputs]
    (one per label, or one value for a regression)."""

    def __init__(self, config, outputs, **kwargs):
        super().__init__(config, **kwargs)
        self.classifier_dropout = keras.layers.Dropout(config.hidden_dropout_prob)
        self.classifier = keras.layers.Dense(outputs, kernel_initializer=_init(config), name="classifier")

    @property
    def head(self):
        return self.classifier

    def call(self, inputs, training=False):
        pooled = self.pool(self.encode(inputs, training=training))
        return {"logits": ops.cast(self.classifier(self.classifier_dropout(pooled, training=training)), "float32")}


def _labels(batch, name):
    return ops.reshape(ops.cast(batch[name], "int32"), (-1,))


class SpanObjective(Objective):
    input_names = FEATURE_INPUTS
    sum_keys = ("loss_sum", "start_correct", "end_correct", "sequences")

    def sums(self, outputs, batch):
        starts, ends = _labels(batch, "start_positions"), _labels(batch, "end_positions")
        start_nll, start_hits = cross_entropy_and_hits(outputs["start_logits"], starts)
        end_nll, end_hits = cross_entropy_and_hits(outputs["end_logits"], ends)
        return {"loss_sum": ops.sum((start_nll + end_nll) / 2.0),
                "start_correct": ops.sum(start_hits),
                "end_correct": ops.sum(end_hits),
                "sequences": ops.cast(ops.shape(starts)[0], "float32")}

    def totals(self, element):
        return {"sequences": ops.cast(ops.size(element["start_positions"]), "float32")}

    def share(self, sums, totals):
        return sums["loss_sum"] / totals["sequences"]

    @staticmethod
    def metrics(sums):
        sequences = max(sums["sequences"], 1.0)
        return {"loss": sums["loss_sum"] / sequences,
                "span_accuracy": (sums["start_correct"] + sums["end_correct"]) / (2 * sequences)}


def _weights(batch):
    return ops.reshape(ops.cast(batch["is_real_example"], "float32"), (-1,))


class ClassificationObjective(Objective):
    input_names = FEATURE_INPUTS
    sum_keys: tuple[str, ...] = ("loss_sum", "correct", "sequences")

    def sums(self, outputs, batch):
        labels, weights = _labels(batch, "label_ids"), _weights(batch)
        nll, hits = cross_entropy_and_hits(outputs["logits"], labels)
        return {"loss_sum": ops.sum(nll * weights),
                "correct": ops.sum(hits * weights),
                "sequences": ops.sum(weights)}

    def totals(self, element):
        return {"sequences": ops.sum(ops.cast(element["is_real_example"], "float32"))}

    def share(self, sums, totals):
        return sums["loss_sum"] / ops.maximum(totals["sequences"], 1.0)

    @staticmethod
    def metrics(sums):
        sequences = max(sums["sequences"], 1.0)
        return {"loss": sums["loss_sum"] / sequences, "accuracy": sums["correct"] / sequences}


class RegressionObjective(ClassificationObjective):
    sum_keys = ("loss_sum", "sequences")

    def sums(self, outputs, batch):
        labels = ops.reshape(ops.cast(batch["label_ids"], "float32"), (-1,))
        errors = ops.square(ops.reshape(outputs["logits"], (-1,)) - labels)
        weights = _weights(batch)
        return {"loss_sum": ops.sum(errors * weights), "sequences": ops.sum(weights)}

    @staticmethod
    def metrics(sums):
        return {"loss": sums["loss_sum"] / max(sums["sequences"], 1.0)}
